"""Rewind as an MCP server (`rewind mcp`): a coding agent lists runs, reads trajectories and
step values, plans and makes forks, diffs and blames runs, through the Model Context Protocol.

Modules: `server` (the `MCPServer` from the official `mcp` SDK, its tools and resource, the stdio
and streamable HTTP transports), `render` (the API's objects as structured data and short text),
`schema` (the tools' typed outputs). Nothing here is imported by `import rewind`: the `mcp`
package is an optional extra (`pip install 'rewind[mcp]'`), loaded only by `rewind mcp`.
"""

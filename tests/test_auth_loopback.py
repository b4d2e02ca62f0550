"""Without `[auth]` the dashboard is not reachable from other machines: started with the shipped
`.streamlit/config.toml` (server.address = 127.0.0.1, no address on the command line), it answers
on loopback and refuses connections on this machine's own non-loopback addresses (from
`hostname -I`; no other host is ever contacted)."""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import sys
import tomllib

from test_auth_browser import ROOT, base_env, free_port, stop, wait_http


def own_addresses() -> list:
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=True).stdout.split()
    addrs = [a for a in out if not ipaddress.ip_address(a.split("%")[0]).is_loopback]
    assert addrs, f"this machine has no non-loopback address to try (hostname -I: {out})"
    return addrs


def test_the_shipped_config_listens_on_loopback_only():
    cfg = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text())
    assert cfg["server"]["address"] == "127.0.0.1"


def test_without_auth_the_server_refuses_other_addresses(tmp_path):
    port = free_port()
    env = base_env(tmp_path)
    env["REWIND_DB"] = str(tmp_path / "loop.db")
    log = tmp_path / "streamlit.log"
    cmd = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port),
           "--server.headless", "true", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]  # the address comes from the shipped config
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_http(f"http://127.0.0.1:{port}/_stcore/health", proc, log, "streamlit")
        for addr in own_addresses():
            ip = ipaddress.ip_address(addr.split("%")[0])
            family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.settimeout(5)
                err = s.connect_ex((addr, port))
            assert err == 111 or err == getattr(socket, "ECONNREFUSED", 111), (
                f"{addr}:{port} answered (error {err}): the dashboard without sign-in is reachable "
                "from other machines")
    finally:
        stop(proc)

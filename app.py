"""Rewind dashboard: `streamlit run app.py`.

Runs on the embedded defaults: the SQLite file in `REWIND_DB` (else ./rewind.db) and the
offline model simulator. Pages: Runs, Fork, Diff, Settings (rewind_ui/shell.py draws the
navigation and the sidebar). Deep links: `?run=ID&node=NAME` opens a run, `?a=ID&b=ID` opens
the diff of two runs; `/diff?…`, `/fork?…`, `/runs?…` work as the first visit too.
"""

from rewind_ui import shell

shell.run_app()

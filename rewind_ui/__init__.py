"""Thin UI helpers for the Streamlit dashboard (app.py, pages/). Not part of `rewind`:
`rewind` never imports streamlit; this package only calls rewind's public API."""

"""Replay: a session rebuilt from its audit log (session.py), the recorded answers a re-execution is given (model.py), and the self-contained HTML page (html.py)."""

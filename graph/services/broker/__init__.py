"""The broker's operator commands: the kill switch (control.py), and status and reconciliation (reconcile.py)."""

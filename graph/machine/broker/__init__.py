"""A real broker behind the execution seam: the backend EXECUTING submits through (execution.py), its pre-submit
checks (checks.py), and which backend a run gets (choose.py)."""

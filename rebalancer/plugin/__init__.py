"""`kubectl spot-rebalancer`: a kubectl plugin (`kubectl-spot_rebalancer` on PATH) that reads the
cluster with the user's kubeconfig and shows what the controller sees (`status`) and what is
misconfigured (`doctor`). It only reads, and computes with the controller's own pure code.

- `gather.py`: the reads (the only module here that does I/O);
- `view.py`: what was read, turned into the controller's views and settings (pure);
- `status.py`, `doctor.py`: the two commands' content and its text form (pure);
- `terminal.py`: control characters in what the cluster wrote, shown and not obeyed (pure);
- `main.py`: the command line.
"""

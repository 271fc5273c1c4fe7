"""GPU leases, launcher side: a launch's GPUs taken on every host at once or not at all, its wait
in the queue (take), who holds what (who), and the words for it (words). The hosts' part is
remote/host/lease.py, leasedir.py and leaseop.py."""

"""A run that stalls: the hang watch, every rank's stack (py-spy), NCCL's flight recorder."""

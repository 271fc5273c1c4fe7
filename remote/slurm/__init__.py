"""A run handed to Slurm: its sbatch script (script), submitted through the login node (login),
its queue read (queue), each node reached through `srun --overlap` (transport), the run followed
as on SSH hosts and ended as Slurm ends it (run), the history's word on it (status), `ddptui export
slurm` (export)."""

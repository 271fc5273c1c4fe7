"""The names of NCCL's flight recorder's files, for both sides (the launcher sets them in the
ranks' environment and copies what node 0 keeps; the hosts dump, read and keep them).

In a node's private scratch directory, torch's own, per rank: a byte written into
PIPE + rank + ".pipe" dumps the rank's ring into TRACE + rank; PIPE_VAR names the pipe in the
ranks' environment. Kept in a node's or the run's directory: FOLDER + attempt (or time), in it
TRACE + rank + ".json" a rank and the analyser's VERDICT. python3 >= 3.8, stdlib only.
"""

PIPE_VAR = "TORCH_NCCL_DEBUG_INFO_PIPE_FILE"  # set where nccl.flight_recorder is on
PIPE = "nccl_pipe_rank_"
TRACE = "nccl_trace_rank_"
FOLDER = "flight-"
VERDICT = "analysis.txt"

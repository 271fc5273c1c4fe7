"""One run, launched and followed: its launch step by step (launch) and the plan of every node's
command (plan), the run itself (runner), its supervisors followed to the end (gang), what they
say (nodemsg, failures), the verdict, spares taking lost nodes' places (recover), a run rejoined
late (late), runs' statuses (statuses), the checks and the deep check (checkup, deepcheck), and
the dashboard's cluster."""

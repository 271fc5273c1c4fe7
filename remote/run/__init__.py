"""One run, launched and followed: the plan of every node's command (plan), the run itself
(runner), its supervisors followed to the end (gang), what they say (nodemsg, failures), the
verdict, spares taking lost nodes' places (recover), a run rejoined late (late), the deep check,
and the dashboard's cluster."""

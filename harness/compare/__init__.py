"""`streamlab scenario compare`: a latency regression gate between two servers (docs/COMPARE.md).

Each scenario runs live on both sides in interleaved rounds, one server up at a time, through the
same Toxiproxy and clients (sides: what a side is and how it is started); every round's outcomes
are checked first (gate); each group's figures are then compared round by round, paired
(stats); the result is a table, JSON, Markdown and a plot (report).
"""

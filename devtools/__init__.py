"""Development helpers shared by tests/ and bench/ (not part of the installed packages): ``local_cluster`` starts
local multi-process jobs (an MXNet parameter-server cluster, torch DDP ranks) on 127.0.0.1."""

"""Development helpers shared by tests/ and bench/ (not part of the installed packages): ``local_cluster`` starts
local multi-process jobs (an MXNet parameter-server cluster, torch DDP ranks) on 127.0.0.1; ``torch_ranks`` is the
rank side of the torch jobs (process group with a deadline, DDP or FSDP2, whole weights, an exit that cannot hang)."""

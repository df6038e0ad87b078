"""A shard worker's read API: what it answers for its store shards (``api``), how it reads
them (``reads``) and the JSON it speaks with the router (``wire``)."""

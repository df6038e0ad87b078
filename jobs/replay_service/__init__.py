"""The warm replay service: a long-lived process that runs replay jobs with their start-up
already paid.

A replay in a fresh process spends 13-19 s (measured on 2 cores) before its first record:
the gateway JVM, the SQL planner, a mini-cluster, Python workers, the model. The service
pays that once at its start (:func:`memstack.pipelines.replay.warm_up.warm_up`) and then
runs each submitted job in its own process with loopback workers, so a job's start-up is the
mini-cluster and the job's deployment only.

- ``memstack replay-service [--port 8766]``: start it (loopback address only); it prints one
  JSON line with its URL once warm.
- ``memstack replay --service URL --into DIR ...``: submit a job; progress on stderr, the
  summary on stdout, as a local replay prints them.
- ``POST /replays`` (JSON body, :class:`~memstack.jobs.replay_service.request.ReplayRequest`)
  answers NDJSON lines, ``{"progress": [...]}`` while the job runs and one last
  ``{"result": {...}}`` or ``{"error": "..."}``; ``GET /healthz`` says whether a job runs.
  One job runs at a time: another submission meanwhile gets 409.
"""

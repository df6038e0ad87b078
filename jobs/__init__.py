"""memstack.jobs."""

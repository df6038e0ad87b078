"""memstack.schemas."""

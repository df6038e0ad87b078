"""memstack.operators."""

"""memstack.pipelines."""

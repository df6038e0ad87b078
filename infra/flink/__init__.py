"""Flink for replay: the connector jars resolved from Maven (pom.xml here) and a standalone
cluster the project can start."""

"""The service's light side: the calls a client makes (HTTP or in process), their answer types, the
client of a running service and where to find it."""

"""Errors of the local infrastructure: the Kafka broker, its jars and its topics.

Each one says what to do next; all derive from :class:`memstack.foundation.errors.MemstackError`.
"""

from __future__ import annotations

from memstack.foundation.errors import MemstackError


class InfraError(MemstackError):
    """Root of the infrastructure errors."""


class JavaNotFoundError(InfraError):
    """No ``java`` on PATH. Install Java 17 (``apt-get install -y openjdk-17-jre-headless``)."""


class JarResolutionError(InfraError):
    """Maven could not resolve the jars of a pom (Kafka, the Flink connector) into the cache."""


class PortInUseError(InfraError):
    """A port the broker needs is taken; the message names the MEMSTACK_* variable to change."""


class BrokerStartError(InfraError):
    """The broker process exited or did not become ready; the message ends with its log tail."""


class BrokerStopError(InfraError):
    """The broker process survived SIGTERM and SIGKILL."""


class TopicError(InfraError):
    """The broker refused a topic operation."""


class TopicConfigMismatchError(TopicError):
    """A topic exists with settings other than memstack's; memstack never alters it silently."""


class ConsoleToolError(InfraError):
    """One of Kafka's console tools failed; the message has its output."""


class FlinkClusterError(InfraError):
    """The standalone Flink cluster did not start or stop; the message ends with its log tail."""


class RayClusterError(InfraError):
    """A node of the local Ray cluster did not start or stop; the message says what to run."""

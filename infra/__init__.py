"""memstack.infra: the local Apache Kafka broker (KRaft), its jars and memstack's topics.

Modules: ``jars`` (Maven resolution of Kafka's jars into ``infra/kafka/lib``), ``broker``
(``KafkaBroker``: format, start, stop, status), ``topics`` (``ensure_topics``, ``TopicSpec``),
``console`` (Kafka's console producer and consumer, for interop tests), ``net`` (ports and the
admin connection), ``errors``. See docs/kafka.md.
"""

"""memstack.infra: the local Apache Kafka broker (KRaft), its jars and memstack's topics.

Modules: ``cache`` (where downloads and builds are kept), ``jars`` (Maven resolution of Kafka's
jars into that cache), ``broker``
(``KafkaBroker``: format, start, stop, status), ``topics`` (``ensure_topics``, ``TopicSpec``),
``console`` (Kafka's console producer and consumer, for interop tests), ``net`` (ports and the
admin connection), ``errors``. See docs/kafka.md.
"""

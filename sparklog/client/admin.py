"""A small admin client: create, delete, grow and describe topics, read and change their configs, delete
records and describe the cluster through the brokers (CreateTopics, DeleteTopics, Metadata, CreatePartitions,
DescribeConfigs, IncrementalAlterConfigs, DeleteRecords, DescribeCluster, Create/Describe/DeleteAcls,
DescribeClientQuotas, AlterClientQuotas), for the command line, tests and
benchmarks. A per-topic or per-resource error is raised as its Kafka error class, with the broker's message.

Rule: `create_topic` returns once every partition of the new topic has a leader in the metadata, so a
producer or consumer started next finds it.
"""

from __future__ import annotations

import time

from sparklog.client.backoff import ExponentialBackoff, Retry
from sparklog.client.config import COMMON_DEFAULTS, resolve
from sparklog.client.connection import IOThread, NetworkClient
from sparklog.client.errors import NoBrokersAvailable, is_retriable
from sparklog.client.metadata import METADATA_VERSION, NO_LEADER
from sparklog.client.producer import bootstrap_from
from sparklog.protocol import (ApiKey, CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig, CreateTopicsRequest,
                               DeleteTopicsRequest, MetadataRequest, MetadataRequestTopic, for_code)
from sparklog.coordination.acl import (AccessControlEntry, AclBinding, Operation, PatternType, Permission,
                                       ResourcePattern, ResourceType)
from sparklog.protocol.acls import AclCreation, CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest
from sparklog.protocol.create_partitions import CreatePartitionsRequest, CreatePartitionsTopic
from sparklog.protocol.delete_records import DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic
from sparklog.protocol.describe_cluster import DescribeClusterRequest
from sparklog.protocol.describe_configs import (RESOURCE_BROKER, RESOURCE_TOPIC, DescribeConfigsRequest,
                                               DescribeConfigsResource)
from sparklog.protocol.incremental_alter_configs import (OP_DELETE, OP_SET, IncrementalAlterableConfig,
                                                         IncrementalAlterConfigsRequest,
                                                         IncrementalAlterConfigsResource)

CREATE_TOPICS_VERSION = 4
DELETE_TOPICS_VERSION = 3
CREATE_PARTITIONS_VERSION = 3
DESCRIBE_CONFIGS_VERSION = 4
INCREMENTAL_ALTER_CONFIGS_VERSION = 1
DELETE_RECORDS_VERSION = 2
DESCRIBE_CLUSTER_VERSION = 1
ACLS_VERSION = 1  # Describe/Create/DeleteAcls: v1 has pattern types and is what librdkafka sends
CLIENT_QUOTAS_VERSION = 1
TOPIC_ALREADY_EXISTS = 36


class AdminClient:
    def __init__(self, bootstrap_servers=None, zookeeper: str | None = None, **settings) -> None:
        config = resolve(COMMON_DEFAULTS, settings)
        self.config = config
        self.timeout = config["request.timeout.ms"] / 1000.0
        self._backoff = ExponentialBackoff.retry(config)
        self._client = NetworkClient.from_config(
            bootstrap_from(bootstrap_servers or config["bootstrap.servers"], zookeeper,
                           config["zookeeper.connection.timeout.ms"]), config)
        self._thread = IOThread("sparklog-admin-io", self._client, lambda: None)
        self._thread.start()

    def _call(self, api_key: int, version: int, body, timeout: float | None = None, node_id: int | None = None):
        """Send to `node_id` (any broker when None), retrying while no broker answers."""
        retry = Retry(self._backoff, timeout or self.timeout)
        error: BaseException | None = None
        while not retry.expired():
            node = self._client.least_loaded_node() if node_id is None else node_id
            if node is not None:
                try:
                    return self._client.submit(node, api_key, version, body).wait(max(0.01, retry.remaining()))
                except ConnectionError as exc:
                    if not is_retriable(exc):  # a refused login: retrying cannot help
                        raise
                    error = exc
            retry.sleep()
        if not self._client.ever_connected:
            raise NoBrokersAvailable(self._client.unreachable())
        raise TimeoutError(f"no broker answered api {api_key}: {error}")

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     config: dict | None = None, exist_ok: bool = False, timeout: float | None = None,
                     assignment: dict[int, tuple[int, ...]] | None = None) -> None:
        """Create a topic; `assignment` ({partition: replicas}) places it, as CreateTopics' assignments do."""
        placed = [CreatableReplicaAssignment(partition_index=p, broker_ids=list(b)) for p, b in (assignment or {}).items()]
        topic = CreatableTopic(name=name, num_partitions=-1 if placed else partitions,
                               replication_factor=-1 if placed else replication_factor,
                               assignments=placed, configs=[CreatableTopicConfig(name=k, value=str(v))
                                                            for k, v in (config or {}).items()])
        partitions = len(placed) or partitions
        timeout_ms = int((timeout or self.timeout) * 1000)
        response = self._call(ApiKey.CREATE_TOPICS, CREATE_TOPICS_VERSION,
                              CreateTopicsRequest(topics=[topic], timeout_ms=timeout_ms), timeout)
        existed = False
        for result in response.topics:
            existed = result.error_code == TOPIC_ALREADY_EXISTS
            if result.error_code and not (exist_ok and existed):
                raise for_code(result.error_code)(result.error_message or name)
        self.wait_for_leaders(name, timeout, 1 if existed else partitions)

    def delete_topic(self, name: str, timeout: float | None = None) -> None:
        timeout_ms = int((timeout or self.timeout) * 1000)
        response = self._call(ApiKey.DELETE_TOPICS, DELETE_TOPICS_VERSION,
                              DeleteTopicsRequest(topic_names=[name], timeout_ms=timeout_ms), timeout)
        for result in response.responses:
            if result.error_code:
                raise for_code(result.error_code)(name)

    def create_partitions(self, name: str, total: int, timeout: float | None = None) -> None:
        """Grow the topic to `total` partitions; returns once each has a serving leader."""
        timeout_ms = int((timeout or self.timeout) * 1000)
        response = self._call(ApiKey.CREATE_PARTITIONS, CREATE_PARTITIONS_VERSION, CreatePartitionsRequest(
            topics=[CreatePartitionsTopic(name=name, count=total)], timeout_ms=timeout_ms), timeout)
        _raise_first(response.results, name)
        self.wait_for_leaders(name, timeout, total)

    def describe_configs(self, name: str, broker: bool = False) -> dict[str, tuple[str | None, int]]:
        """{config: (value, Kafka's config source)} of a topic (or, with broker=True, of broker `name`)."""
        resource = DescribeConfigsResource(resource_type=RESOURCE_BROKER if broker else RESOURCE_TOPIC,
                                           resource_name=name, configuration_keys=None)
        response = self._call(ApiKey.DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_VERSION,
                              DescribeConfigsRequest(resources=[resource]), node_id=self._broker_node(name, broker))
        _raise_first(response.results, name)
        return {c.name: (c.value, c.config_source) for r in response.results for c in r.configs}

    def alter_configs(self, name: str, settings: dict | None = None, delete: tuple = (),
                      validate_only: bool = False, broker: bool = False) -> None:
        """Set and delete a topic's config overrides (IncrementalAlterConfigs); all or nothing. With
        broker=True, broker `name`'s dynamic configs ("": the cluster-wide default), asked of that broker."""
        configs = [IncrementalAlterableConfig(name=k, config_operation=OP_SET, value=str(v))
                   for k, v in (settings or {}).items()]
        configs += [IncrementalAlterableConfig(name=k, config_operation=OP_DELETE, value=None) for k in delete]
        request = IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[
            IncrementalAlterConfigsResource(resource_type=RESOURCE_BROKER if broker else RESOURCE_TOPIC,
                                            resource_name=name, configs=configs)])
        response = self._call(ApiKey.INCREMENTAL_ALTER_CONFIGS, INCREMENTAL_ALTER_CONFIGS_VERSION, request,
                              node_id=self._broker_node(name, broker))
        _raise_first(response.responses, name)

    def _broker_node(self, name: str, broker: bool) -> int | None:
        """The broker a BROKER resource is asked of: the one it names (its address learnt from metadata)."""
        if not broker or not name:
            return None
        if not name.isdigit():
            raise ValueError(f"broker {name!r} is not a broker id")
        self.describe([])
        return int(name)

    def delete_records(self, name: str, before: dict[int, int]) -> dict[int, int]:
        """Move each partition's log start offset to `before[partition]` (-1: the high watermark), asking
        each partition's leader; returns {partition: log start offset afterwards}."""
        leaders = self.wait_for_leaders(name)
        found = {}
        for leader in sorted(set(leaders[p] for p in before)):
            parts = [DeleteRecordsPartition(partition_index=p, offset=o) for p, o in sorted(before.items())
                     if leaders[p] == leader]
            request = DeleteRecordsRequest(topics=[DeleteRecordsTopic(name=name, partitions=parts)],
                                           timeout_ms=int(self.timeout * 1000))
            response = self._client.submit(leader, ApiKey.DELETE_RECORDS, DELETE_RECORDS_VERSION,
                                           request).wait(self.timeout)
            for part in (p for t in response.topics for p in t.partitions):
                if part.error_code:
                    raise for_code(part.error_code)(f"{name}-{part.partition_index}")
                found[part.partition_index] = part.low_watermark
        return found

    def describe_cluster(self) -> tuple[str, int, dict[int, tuple[str, int]]]:
        """(cluster id, controller id, {broker id: (host, port)})."""
        response = self._call(ApiKey.DESCRIBE_CLUSTER, DESCRIBE_CLUSTER_VERSION, DescribeClusterRequest())
        if response.error_code:
            raise for_code(response.error_code)(response.error_message or "DescribeCluster")
        return response.cluster_id, response.controller_id, {b.broker_id: (b.host, b.port) for b in response.brokers}

    def describe(self, names: list[str] | None = None) -> dict[str, dict[int, int]]:
        """{topic: {partition: leader}} of the named topics (all when None); unknown topics are left out."""
        topics = None if names is None else [MetadataRequestTopic(name=n) for n in names]
        response = self._call(ApiKey.METADATA, METADATA_VERSION,
                              MetadataRequest(topics=topics, allow_auto_topic_creation=False))
        self._client.set_nodes({b.node_id: (b.host, b.port) for b in response.brokers})
        return {t.name: {p.partition_index: p.leader_id for p in t.partitions}
                for t in response.topics if not t.error_code}

    def metadata(self, names: list[str] | None = None, timeout: float | None = None):
        """The raw Metadata response for the named topics (all when None), never creating a topic: callers that
        must tell a missing topic or a dead leader from an empty one read its error codes and broker list."""
        topics = None if names is None else [MetadataRequestTopic(name=n) for n in names]
        response = self._call(ApiKey.METADATA, METADATA_VERSION,
                              MetadataRequest(topics=topics, allow_auto_topic_creation=False), timeout)
        self._client.set_nodes({b.node_id: (b.host, b.port) for b in response.brokers})
        return response

    def wait_for_leaders(self, name: str, timeout: float | None = None, partitions: int = 1) -> dict[int, int]:
        """Until the metadata lists at least `partitions` partitions (a broker's metadata may lag a creation
        or a growth), names a leader for each, and each leader serves its partition (it answers ListOffsets
        for it): only then does even an acks=0 record land."""
        retry = Retry(self._backoff, timeout or self.timeout)
        while True:
            leaders = self.describe([name]).get(name)
            if (leaders and len(leaders) >= partitions and all(leader != NO_LEADER for leader in leaders.values())
                    and self._served(name, leaders)):
                return leaders
            if retry.expired():
                raise TimeoutError(f"topic {name!r} has no serving leader for every partition: {leaders}")
            retry.sleep()

    def _served(self, name: str, leaders: dict[int, int]) -> bool:
        from sparklog.client.consumer import LIST_OFFSETS_VERSION, list_offsets_request
        from sparklog.protocol.list_offsets import LATEST_TIMESTAMP

        for partition, leader in leaders.items():
            request = list_offsets_request({(name, partition): LATEST_TIMESTAMP})
            try:
                response = self._client.submit(leader, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, request).wait(5)
            except Exception:  # noqa: BLE001 - not yet reachable or not yet leading: ask again
                return False
            if any(p.error_code for t in response.topics for p in t.partitions):
                return False
        return True

    def log_offsets(self, name: str, leaders: dict[int, int], at_time: int | None = None) -> dict[int, tuple]:
        """{partition: (log start, high watermark)} asked of each partition's leader (`leaders` maps partition
        to leader id); partitions whose leader does not answer are left out. With `at_time` (ms), a third
        offset: the first record's at or after that time (-1: none)."""
        found, _ = self.leader_offsets({(name, p): leader for p, leader in leaders.items()}, self.timeout, at_time)
        return {p: offsets for (_, p), offsets in found.items()}

    def leader_offsets(self, leaders: dict[tuple[str, int], int], timeout: float, at_time: int | None = None,
                       brokers: dict[int, tuple[str, int]] | None = None) -> tuple[dict[tuple[str, int], tuple], set[int]]:
        """Rule (one bound): ({(topic, partition): (log start, high watermark[, offset at `at_time`])}, the
        leaders that did not answer within `timeout`), every leader asked at once, so that one dead or slow
        broker costs the bound once, not a timeout per leader. `brokers` ({id: (host, port)}, e.g. from the
        ZooKeeper registry) tells where the leaders are when no metadata was read."""
        from sparklog.client.consumer import LIST_OFFSETS_VERSION, list_offsets_request
        from sparklog.protocol.list_offsets import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP

        if brokers:
            self._client.set_nodes(brokers)
        asked = (EARLIEST_TIMESTAMP, LATEST_TIMESTAMP) + (() if at_time is None else (at_time,))
        by_leader: dict[int, list[tuple[str, int]]] = {}
        for tp, leader in leaders.items():
            by_leader.setdefault(leader, []).append(tp)
        futures = [(leader, i, self._client.submit(leader, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION,
                                                   list_offsets_request({tp: ts for tp in tps}), timeout=timeout))
                   for leader, tps in by_leader.items() for i, ts in enumerate(asked)]
        deadline = time.monotonic() + timeout
        found: dict[tuple[str, int], dict[int, int]] = {}
        silent: set[int] = set()
        for leader, i, future in futures:
            try:
                response = future.wait(max(0.0, deadline - time.monotonic()))
            except Exception:  # noqa: BLE001 - unreachable, slow or failing: its partitions are unknown
                silent.add(leader)
                continue
            for topic in response.topics:
                for part in (p for p in topic.partitions if not p.error_code):
                    found.setdefault((topic.name, part.partition_index), {})[i] = part.offset
        return {tp: tuple(o[i] for i in range(len(asked))) for tp, o in found.items() if len(o) == len(asked)}, silent

    def create_acls(self, bindings: list) -> None:
        """Create `AclBinding`s (coordination/acl.py); raises the first one's error."""
        creations = [AclCreation(resource_type=b.pattern.type, resource_name=b.pattern.name,
                                 resource_pattern_type=b.pattern.pattern, principal=b.entry.principal,
                                 host=b.entry.host, operation=b.entry.operation, permission_type=b.entry.permission)
                     for b in bindings]
        response = self._call(ApiKey.CREATE_ACLS, ACLS_VERSION, CreateAclsRequest(creations=creations))
        _raise_first(response.results, "CreateAcls")

    def describe_acls(self, acl_filter) -> list:
        """The `AclBinding`s an `AclBindingFilter` matches."""
        response = self._call(ApiKey.DESCRIBE_ACLS, ACLS_VERSION, DescribeAclsRequest(**_filter_fields(acl_filter)))
        if response.error_code:
            raise for_code(response.error_code)(response.error_message or "DescribeAcls")
        return [AclBinding(ResourcePattern(ResourceType(r.resource_type), r.resource_name, PatternType(r.pattern_type)),
                           AccessControlEntry(a.principal, a.host, Operation(a.operation), Permission(a.permission_type)))
                for r in response.resources for a in r.acls]

    def delete_acls(self, filters: list) -> list:
        """Per `AclBindingFilter`, the `AclBinding`s it deleted."""
        response = self._call(ApiKey.DELETE_ACLS, ACLS_VERSION, DeleteAclsRequest(filters=[
            DeleteAclsRequest.DeleteAclsFilter(**_filter_fields(f)) for f in filters]))
        _raise_first(response.filter_results, "DeleteAcls")
        return [[AclBinding(ResourcePattern(ResourceType(m.resource_type), m.resource_name, PatternType(m.pattern_type)),
                            AccessControlEntry(m.principal, m.host, Operation(m.operation), Permission(m.permission_type)))
                 for m in result.matching_acls] for result in response.filter_results]
    def describe_client_quotas(self, components: list[tuple[str, int, str | None]], strict: bool = False
                               ) -> list[tuple[list[tuple[str, str | None]], dict[str, float]]]:
        """DescribeClientQuotas: [(entity components, {quota key: value})] of the entities matching the filter
        components (entity type, match type, match)."""
        from sparklog.protocol.client_quotas import DescribeClientQuotasRequest as Request

        request = Request(strict=strict, components=[Request.ComponentData(entity_type=t, match_type=m, match=n)
                                                     for t, m, n in components])
        response = self._call(ApiKey.DESCRIBE_CLIENT_QUOTAS, CLIENT_QUOTAS_VERSION, request)
        if response.error_code:
            raise for_code(response.error_code)(response.error_message or "DescribeClientQuotas")
        return [([(e.entity_type, e.entity_name) for e in entry.entity], {v.key: v.value for v in entry.values})
                for entry in response.entries or []]

    def alter_client_quotas(self, entity: list[tuple[str, str | None]], settings: dict[str, float],
                            delete: tuple = (), validate_only: bool = False) -> None:
        """AlterClientQuotas of one entity: set `settings`, remove `delete`."""
        from sparklog.protocol.client_quotas import AlterClientQuotasRequest as Request

        ops = [Request.EntryData.OpData(key=k, value=float(v), remove=False) for k, v in settings.items()]
        ops += [Request.EntryData.OpData(key=k, value=0.0, remove=True) for k in delete]
        request = Request(validate_only=validate_only, entries=[Request.EntryData(
            entity=[Request.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity], ops=ops)])
        response = self._call(ApiKey.ALTER_CLIENT_QUOTAS, CLIENT_QUOTAS_VERSION, request)
        _raise_first(response.entries, str(entity))

    def close(self) -> None:
        self._thread.stop()

    def __enter__(self) -> "AdminClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _filter_fields(acl_filter) -> dict:
    return dict(resource_type_filter=acl_filter.resource_type, resource_name_filter=acl_filter.name,
                pattern_type_filter=acl_filter.pattern, principal_filter=acl_filter.principal,
                host_filter=acl_filter.host, operation=acl_filter.operation, permission_type=acl_filter.permission)


def _raise_first(results, name: str) -> None:
    """Raise the first per-resource error of a response, with the broker's message."""
    for result in results:
        if result.error_code:
            raise for_code(result.error_code)(result.error_message or name)

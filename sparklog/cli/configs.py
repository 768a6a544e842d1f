"""`sparklog configs`: kafka-configs.sh's forms for client quotas (users, clients) and topic and broker configs.

    sparklog configs --bootstrap-server H:P [--command-config FILE] --entity-type users|clients|topics|brokers
                     (--entity-name N | --entity-default) [--entity-type ... (--entity-name N | --entity-default)]
                     (--describe | --alter [--add-config k=v,k2=v2] [--delete-config k,k2])
    sparklog configs --zookeeper H:P[/chroot] --entity-type users|clients ...   (quotas only, brokers not needed)

Rule 1: each --entity-type pairs with the --entity-name or --entity-default that follows it, as kafka-configs
reads them; `users` then `clients` is the (user, client-id) entity. Quotas go through DescribeClientQuotas and
AlterClientQuotas (KIP-546), topics and brokers (dynamic broker configs: a broker id, or --entity-default for
the cluster-wide default) through DescribeConfigs and IncrementalAlterConfigs; with --zookeeper the
quota configs are read and written in ZooKeeper directly (coordination.client_quotas, with its change
notification), so users can be set up before any broker runs.
Rule 2: every quota value is checked before anything is sent (client_quotas' quota-values rule): a negative,
zero, absurd or non-numeric value, or an unknown quota key, ends the command with one line and writes nothing.
Rule 3: a SCRAM credential key of a user (`SCRAM-SHA-256=[iterations=8192,password=...]`) goes to
`store_scram_credentials`: salted and stored in ZooKeeper (--zookeeper form, before or beside brokers).
"""

from __future__ import annotations

import argparse

from sparklog.cli.broker import DEFAULT_ZOOKEEPER

ENTITY_TYPES = ("users", "clients", "topics", "brokers")
QUOTA_TYPES = {"users": "user", "clients": "client-id"}  # --entity-type -> KIP-546's entity type
SCRAM_PREFIX = "SCRAM-SHA-"
TOPIC_OVERRIDE = 1  # DescribeConfigs' config_source of a topic's own override
DYNAMIC_BROKER_SOURCES = (2, 3)  # DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG


def store_scram_credentials(args: argparse.Namespace, user: str, mechanism: str, params: dict[str, str]) -> None:
    """Rule 3: store a SCRAM credential of `user` in ZooKeeper (coordination.scram_credentials: salted, in
    Kafka's format, with its change notification), as kafka-configs' --zookeeper form does before brokers run."""
    from sparklog.coordination import scram_credentials

    if not args.zookeeper:
        raise ValueError("SCRAM credentials are set with --zookeeper here (brokers not needed); through a broker, "
                         "use an admin client's AlterUserScramCredentials")
    if "password" not in params:
        raise ValueError(f"{mechanism}: give [iterations=N,password=P] (password missing)")
    try:
        iterations = int(params.get("iterations", scram_credentials.MIN_ITERATIONS))
    except ValueError:
        raise ValueError(f"{mechanism}: iterations must be an integer, not {params['iterations']!r}") from None
    with _zookeeper(args.zookeeper) as zk:
        scram_credentials.store_credential(zk, user, mechanism, params["password"], iterations)


def delete_scram_credentials(args: argparse.Namespace, user: str, mechanism: str) -> None:
    """Rule 3: remove `user`'s credential of `mechanism` from ZooKeeper."""
    from sparklog.coordination import scram_credentials

    if not args.zookeeper:
        raise ValueError("SCRAM credentials are deleted with --zookeeper here; through a broker, use an admin "
                         "client's AlterUserScramCredentials")
    with _zookeeper(args.zookeeper) as zk:
        scram_credentials.delete_credential(zk, user, mechanism)


class _EntityAction(argparse.Action):
    """--entity-type / --entity-name / --entity-default, in order (Rule 1): one list of [type, name|None]."""

    def __call__(self, parser, namespace, values, option_string=None):
        entities = getattr(namespace, "entities", None) or []
        if option_string == "--entity-type":
            entities.append([values, ""])
        elif not entities or entities[-1][1] != "":
            raise argparse.ArgumentError(self, "give --entity-type before each --entity-name/--entity-default")
        else:
            entities[-1][1] = None if option_string == "--entity-default" else values
        namespace.entities = entities


def add_parser(subparsers) -> None:
    configs = subparsers.add_parser("configs", help="client quotas and topic configs (kafka-configs.sh's forms)")
    where = configs.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap-server", metavar="HOST:PORT[,...]")
    where.add_argument("--zookeeper", metavar="HOST:PORT[/chroot]", help=f"quotas only (e.g. {DEFAULT_ZOOKEEPER})")
    configs.add_argument("--command-config", metavar="FILE", help="client properties (security settings)")
    configs.add_argument("--entity-type", choices=ENTITY_TYPES, action=_EntityAction, dest="entities")
    configs.add_argument("--entity-name", action=_EntityAction, dest="entities")
    configs.add_argument("--entity-default", action=_EntityAction, nargs=0, dest="entities")
    action = configs.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true")
    action.add_argument("--alter", action="store_true")
    configs.add_argument("--add-config", default="", metavar="K=V,K2=V2")
    configs.add_argument("--delete-config", default="", metavar="K,K2")
    configs.set_defaults(func=run, entities=None)


def run(args: argparse.Namespace) -> int:
    entities = args.entities or []
    if not entities:
        raise ValueError("give --entity-type (users, clients, topics or brokers)")
    kinds = [kind for kind, _ in entities]
    if kinds not in (["users"], ["clients"], ["users", "clients"], ["topics"], ["brokers"]):
        raise ValueError(f"entity types {', '.join(kinds)}: use users, clients, users then clients, topics or brokers")
    if args.alter and not (args.add_config or args.delete_config):
        raise ValueError("--alter needs --add-config or --delete-config")
    if kinds[0] in ("topics", "brokers"):
        return _resource(args, kinds[0], entities[0][1])
    return _quotas(args, entities)


def parse_add_config(text: str) -> dict[str, str]:
    """`k=v,k2=[a=1,b=2]` -> {k: v, k2: "[a=1,b=2]"}: commas inside brackets stay in the value."""
    items, depth, current = [], 0, ""
    for char in text:
        depth += char == "["
        depth -= char == "]"
        if char == "," and depth == 0:
            items.append(current)
            current = ""
        else:
            current += char
    if depth:
        raise ValueError(f"--add-config {text!r}: unbalanced brackets")
    items.append(current)
    out = {}
    for item in (i.strip() for i in items if i.strip()):
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--add-config: expected KEY=VALUE, not {item!r}")
        out[key.strip()] = value.strip()
    return out


def _deleted(args) -> tuple[str, ...]:
    return tuple(k.strip() for k in args.delete_config.split(",") if k.strip())


# -- quotas -------------------------------------------------------------------------------------------------


def _quotas(args, entities: list) -> int:
    from sparklog.coordination import client_quotas as cq

    if args.describe:
        return _describe_quotas(args, entities)
    to_set = parse_add_config(args.add_config)
    scram = {k: to_set.pop(k) for k in list(to_set) if k.startswith(SCRAM_PREFIX)}
    if scram and (len(entities) != 1 or entities[0][0] != "users" or entities[0][1] is None):
        raise ValueError("SCRAM credentials belong to one named user (--entity-type users --entity-name N)")
    values = {key: cq.check_value(key, text) for key, text in to_set.items()}  # Rule 2, before anything is sent
    for key in _deleted(args):
        if key not in cq.QUOTA_KEYS and not key.startswith(SCRAM_PREFIX):
            raise ValueError(f"unknown quota {key!r} (known: {', '.join(cq.QUOTA_KEYS)})")
    for mechanism, text in scram.items():
        store_scram_credentials(args, entities[0][1], mechanism, _scram_params(text))
    for mechanism in (k for k in _deleted(args) if k.startswith(SCRAM_PREFIX)):
        delete_scram_credentials(args, entities[0][1], mechanism)
    removed = tuple(k for k in _deleted(args) if not k.startswith(SCRAM_PREFIX))
    if values or removed:
        _alter_quotas(args, entities, values, removed)
    print(f"Completed updating config for entity: {_entity_text(entities)}.")
    return 0


def _scram_params(text: str) -> dict[str, str]:
    inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    return parse_add_config(inner)


def _alter_quotas(args, entities, values: dict[str, float], removed: tuple) -> None:
    if args.zookeeper:
        from sparklog.coordination import client_quotas as cq
        from sparklog.broker.handlers.client_quotas import stored_text

        with _zookeeper(args.zookeeper) as zk:
            cq.alter_entity_config(zk, _zk_entity(entities), {k: stored_text(k, v) for k, v in values.items()},
                                   removed)
        return
    with _admin(args) as admin:
        admin.alter_client_quotas(_components(entities), values, removed)


def _describe_quotas(args, entities) -> int:
    from sparklog.protocol.client_quotas import MATCH_ANY, MATCH_DEFAULT, MATCH_EXACT

    filters = [(QUOTA_TYPES[kind], MATCH_ANY if name == "" else MATCH_DEFAULT if name is None else MATCH_EXACT,
                name or None) for kind, name in entities]
    if args.zookeeper:
        found = _zk_describe(args.zookeeper, filters)
    else:
        with _admin(args) as admin:
            found = admin.describe_client_quotas(filters, strict=True)
    for components, quotas in found:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(quotas.items()))
        print(f"Quota configs for {_components_text(components)} are {shown}")
    return 0


def _zk_describe(zookeeper: str, filters) -> list:
    from types import SimpleNamespace

    from sparklog.broker.handlers.client_quotas import entry_of, filters_of, matches
    from sparklog.coordination import client_quotas as cq

    wanted = filters_of([SimpleNamespace(entity_type=t, match_type=m, match=n) for t, m, n in filters])
    with _zookeeper(zookeeper) as zk:
        stored = cq.read_all(zk)
    entries = [entry_of(e, q) for e, q in sorted(stored.items(), key=lambda item: item[0].path)
               if matches(e, wanted, True)]
    return [([(c.entity_type, c.entity_name) for c in entry.entity], {v.key: v.value for v in entry.values})
            for entry in entries]


def _components(entities) -> list[tuple[str, str | None]]:
    return [(QUOTA_TYPES[kind], name) for kind, name in entities]


def _zk_entity(entities):
    from sparklog.broker.handlers.client_quotas import entity_of

    return entity_of(_components(entities))


def _entity_text(entities) -> str:
    return _components_text(_components(entities))


def _components_text(components) -> str:
    return ", ".join(f"the default {kind}" if name is None else f"{kind} '{name}'" for kind, name in components)


# -- topics and brokers -------------------------------------------------------------------------------------


def _resource(args, kind: str, name: str | None) -> int:
    if args.zookeeper:
        raise ValueError(f"{kind} with --zookeeper: give --bootstrap-server (topic configs go through the brokers)")
    if not name and not (kind == "brokers" and name is None):
        raise ValueError(f"--entity-type {kind} needs --entity-name" + (" or --entity-default" if kind == "brokers"
                                                                        else ""))
    if kind == "brokers":
        return _brokers(args, name or "")
    with _admin(args) as admin:
        if args.describe:
            configs = admin.describe_configs(name)
            _print_dynamic(f"Dynamic configs for topic {name} are:", {k: v for k, (v, source) in configs.items() if source == TOPIC_OVERRIDE})
            return 0
        from sparklog.cli.topic_rules import checked_overrides

        admin.alter_configs(name, checked_overrides(parse_add_config(args.add_config)), _deleted(args))
    print(f"Completed updating config for topic {name}.")
    return 0


def _brokers(args, name: str) -> int:
    """Broker `name`'s dynamic configs ("": the cluster-wide default, --entity-default), as kafka-configs: the
    describe lists the dynamic ones (DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG)."""
    label = f"broker {name}" if name else "the default broker"
    with _admin(args) as admin:
        if args.describe:
            configs = admin.describe_configs(name, broker=True)
            header = f"Dynamic configs for {label} are:" if name else "Default configs for brokers in the cluster are:"
            _print_dynamic(header, {k: v for k, (v, s) in configs.items() if s in DYNAMIC_BROKER_SOURCES})
            return 0
        admin.alter_configs(name, parse_add_config(args.add_config), _deleted(args), broker=True)
    print(f"Completed updating config for {label}.")
    return 0


def _print_dynamic(header: str, shown: dict) -> None:
    print(header)
    for key, value in sorted(shown.items()):
        print(f"  {key}={value}")


def _admin(args):
    from sparklog.client.admin import AdminClient

    settings = {}
    if args.command_config:
        from sparklog.broker.config import load_properties

        settings = load_properties(args.command_config)
    return AdminClient(bootstrap_servers=args.bootstrap_server, **settings)


class _zookeeper:
    def __init__(self, connect: str) -> None:
        self.connect = connect

    def __enter__(self):
        from sparklog.coordination.connection import connect

        self.zk = connect(self.connect)
        return self.zk

    def __exit__(self, *exc) -> None:
        from sparklog.coordination.connection import close

        close(self.zk)

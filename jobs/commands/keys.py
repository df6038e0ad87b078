"""``memstack keys add | list | revoke``: API keys of the service, stored hashed
(see docs/service.md)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("keys", help="API keys of `memstack serve`: add (prints the key once), "
                                    "list, revoke")
    actions = p.add_subparsers(dest="keys_command", metavar="ACTION")
    actions.required = True
    add = actions.add_parser("add", help="create a key; only its SHA-256 hash is stored")
    add.add_argument("--tenant", action="append", required=True, help="repeatable")
    add.add_argument("--role", action="append", choices=("read", "write", "forget"),
                     help="repeatable (default: read)")
    add.add_argument("--label", default="", help="a note stored beside the hash")
    add.set_defaults(func=_add)
    listing = actions.add_parser("list", help="the keys file's grants (hashes abbreviated)")
    listing.set_defaults(func=_list)
    revoke = actions.add_parser("revoke", help="remove a key by the start of its hash (as "
                                               "`keys list` shows it); a running service "
                                               "refuses it within a second")
    revoke.add_argument("digest", help="sha256:<hex…> or its first 8+ hex digits")
    revoke.set_defaults(func=_revoke)


def _add(args: argparse.Namespace) -> int:
    from memstack.server.api_keys import add_key, keys_file

    path = keys_file()
    key = add_key(path, args.tenant, args.role or ["read"], args.label)
    print(key)
    import sys

    print(f"stored its hash in {path}; the key is shown only now", file=sys.stderr)
    return 0


def _list(args: argparse.Namespace) -> int:
    from memstack.server.api_keys import ApiKeys, keys_file

    path = keys_file()
    if not path.exists():
        print(f"no keys file at {path}; create a key with `memstack keys add --tenant T`")
        return 0
    for grant in ApiKeys.parse(path.read_text(encoding="utf-8").splitlines(), str(path)).grants:
        print(f"sha256:{grant.digest.hex()[:12]}…  tenants={','.join(sorted(grant.tenants))}  "
              f"roles={','.join(sorted(grant.roles))}")
    return 0


def _revoke(args: argparse.Namespace) -> int:
    from memstack.server.api_keys import keys_file, revoke_key

    path = keys_file()
    if not path.exists():
        print(f"no keys file at {path}")
        return 1
    gone = revoke_key(path, args.digest)
    print(f"revoked {gone} key(s) in {path}" if gone else f"no key in {path} starts with "
          f"{args.digest}")
    return 0 if gone else 1

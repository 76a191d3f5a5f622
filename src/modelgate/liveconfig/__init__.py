"""Providers, deployments, aliases and prices changed at runtime through the admin API.

The configuration file stays the way to deploy from code; what the admin API changes is stored in
the database (``storage.upstream_entries``) and laid over the file's entries of the same names
(``overlay``). Every serving process polls the store's generation and applies a change within a
second (``live``), through the same path as a SIGHUP reload (``server.reload``), keeping the
providers (their connection pools and credential pools), cooldowns and session pins of what did
not change. docs/upstreams.md, "Changing upstreams at runtime".
"""

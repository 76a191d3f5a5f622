"""The audit trail: who changed what, with the state before and after (docs/people.md).

``audit.actor`` says who is acting (an admin token, ``cli``, later a person) for the writes made
while serving one admin request; ``audit.describe`` turns records into what the log shows (never
a secret or a digest); the entries themselves are written by the storage, in the same
transaction as the change they record (``storage.audit``).
"""

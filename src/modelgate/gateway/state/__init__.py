"""Stored Responses state (issue #17): resolving ``previous_response_id``, ``item_reference`` and
``conversation`` before a request is reserved (``prepare``), keeping completed answers (``keep``),
and the endpoints that read and delete what is kept (``responses_api``, ``conversations_api``).
Storage is ``storage.responses``; the pure wire steps are ``formats.responses.state``."""

"""Alert webhooks: ``balance.low``, ``cap.threshold``, ``upstream.down``, ``key.revoked`` and
``key.expiring``, signed JSON POSTs sent once per crossing (docs/people.md)."""

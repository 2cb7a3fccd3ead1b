"""The service's own stores (ADR 0075): the tables that are neither a read model's nor the
application's, each behind a class whose methods name what they ask and write.

* :mod:`stores.drp_requests`: the Data Rights Protocol's requests (``drp_requests``);
* :mod:`stores.webhooks`: webhook subscriptions and deliveries (``webhook_subscriptions``,
  ``webhook_deliveries``);
* :mod:`stores.tenants`: a fleet's tenants (``fleet_tenants``) and a tenant's schema;
* :mod:`stores.tokens`: the bearer tokens' rows and argon2id hashes (``auth_tokens``).

The use cases (``service/``) and the credentials (``credentials/``) call these and import
no ``sqlalchemy``; a database that does not answer is an
:class:`~ledger.errors.EnvironmentProblem` worded here where the callers word it alike.
"""

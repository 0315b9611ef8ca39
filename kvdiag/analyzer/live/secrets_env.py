"""Where a live source's credentials come from when no file names them: environment
variables (secrets never go on the command line). Apart from the client so that the
command line's help can name them without loading an HTTP stack."""

TOKEN_ENV = "KVDIAG_PROMETHEUS_TOKEN"
USER_ENV = "KVDIAG_PROMETHEUS_USER"
PASSWORD_ENV = "KVDIAG_PROMETHEUS_PASSWORD"
TENANT_ENV = "KVDIAG_PROMETHEUS_TENANT"  # Mimir / Cortex / Thanos receive: X-Scope-OrgID

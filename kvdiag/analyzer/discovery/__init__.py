"""Discovery: find an incident's inputs (folders, archives) and tell by content what each is."""

"""The coordinators: the group coordinator (group/) and, beside it, the transaction coordinator."""

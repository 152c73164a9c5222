"""dsh_trio."""

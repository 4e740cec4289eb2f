"""Running untrusted code: the Docker sandbox and its local fallback (arrives with the sandbox issue)."""

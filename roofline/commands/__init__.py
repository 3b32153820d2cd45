"""One module per ``ceiling`` subcommand; each defines ``register(app)``."""

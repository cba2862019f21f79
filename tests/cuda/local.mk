# Filled in by its issue's work.

"""What the rules share: queries on the store, the load picture, layer arithmetic, vocabulary."""

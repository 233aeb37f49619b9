"""The HTTP API under /v1/ (aiohttp): the server and its routes, the one /v1/now document
builder, and what an applied recommendation does."""

"""The HTTP API of API.md: FastAPI app factory, routers, schemas, auth and error mapping.

HTTP status codes exist only in this package; services raise `services.errors` and
`errors.py` maps them in one place.
"""

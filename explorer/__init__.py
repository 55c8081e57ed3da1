"""The web explorer: a server-rendered FastAPI app over the event index."""

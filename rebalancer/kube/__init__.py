"""Kubernetes access: the only package that imports kubernetes_asyncio.

It returns plain data (dicts of the API's JSON, or small views), never generated client models.
"""

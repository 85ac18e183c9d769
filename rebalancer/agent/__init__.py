"""The node agent: this VM's Azure Scheduled Events, published on its own Node."""

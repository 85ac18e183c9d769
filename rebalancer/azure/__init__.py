"""Azure: the Instance Metadata Service (Scheduled Events, VM name). Nothing else calls IMDS."""

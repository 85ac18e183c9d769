"""Azure: the Instance Metadata Service (Scheduled Events, instance name). Nothing else talks to IMDS."""

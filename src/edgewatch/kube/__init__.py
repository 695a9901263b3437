"""The door to the cloud: what every part of edgewatch that talks to the Kubernetes API shares
(issue 22 grows it into the one API client, informer and Lease helpers). Today: the one
classification of API errors (:mod:`edgewatch.kube.errors`)."""

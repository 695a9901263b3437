"""The door to the cloud: what every part of edgewatch that talks to the Kubernetes API shares.

* :mod:`edgewatch.kube.informer`: the one list-then-watch loop (paging, bookmarks, 410 re-list,
  dead-watch detection, jittered backoff, bounded bodies), handing on
  :mod:`edgewatch.kube.events`;
* :mod:`edgewatch.kube.resources`: the API resources edgewatch reads and their paths;
* :mod:`edgewatch.kube.backoff`: the one retry schedule;
* :mod:`edgewatch.kube.errors`: the one classification of API errors, and the predicates that
  read an error Status (``is_not_found``, ``is_conflict``, ...);
* :mod:`edgewatch.kube.upsert`: create an object or update it under optimistic concurrency
  (``create_or_update``);
* :mod:`edgewatch.kube.client`: the API client and its raw HTTP handle, one transport, built from
  public lightkube API only;
* :mod:`edgewatch.kube.http`: the raw handle of a client (``http_client_of``).
"""

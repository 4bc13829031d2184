"""Pure resolution steps: the request, its inputs' contents and the cluster facts in; values out."""

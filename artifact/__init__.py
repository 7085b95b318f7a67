"""OneLA reproduction: framework-neutral workloads, references, GTR store, ancestry, paths and measurement."""

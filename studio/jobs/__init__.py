"""Background jobs, worker side: claiming and finishing rows, the monitor thread, the
sweeper that fails jobs of dead workers and re-sends lost messages, and the bodies of the
simulation and import jobs. Web code only creates and reads job rows (`studio.services`),
enqueues through `studio.tasks`, and reads liveness thresholds from `runtime`."""

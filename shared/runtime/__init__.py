"""What every service is run by: the service shape (`service.Service`: start, run, stop, named root
tasks, outages), the process entrypoint shared by the services' ``__main__`` modules, and leadership
over a lease in the store (`leasing.Leadership`)."""

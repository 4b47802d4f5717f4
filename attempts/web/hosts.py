"""The hosts page: each Docker host's capacity, live sandboxes, queue depth, last heartbeat and
Docker version (attempts/services/host_overview.py), for whoever runs Boltz."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from attempts.services.host_overview import host_overview
from attempts.web.views import view_required


@login_required
@view_required
def host_list(request):
    return render(request, "attempts/host_list.html", {"overview": host_overview()})

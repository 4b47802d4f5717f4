from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render

from .models import Attempt, Task


@login_required
def task_list(request):
    return render(request, "attempts/task_list.html", {"tasks": Task.objects.all()})


@login_required
def task_detail(request, slug):
    task = get_object_or_404(Task, slug=slug)
    return render(request, "attempts/task_detail.html", {"task": task})


@login_required
def attempt_detail(request, pk):
    attempt = get_object_or_404(Attempt, pk=pk)
    return render(request, "attempts/attempt_detail.html", {"attempt": attempt})

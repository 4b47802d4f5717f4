from django.contrib import admin
from django.urls import include, path

from attempts.api.routes import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("", include("attempts.web.urls")),
]

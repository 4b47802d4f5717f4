from django.contrib import admin
from django.urls import include, path

from attempts.api.routes import api
from attempts.web.signin import refuses_with_429

urlpatterns = [
    # The admin's sign-in, limited like the pages' own (its form is set in attempts/admin.py).
    path("admin/login/", refuses_with_429(admin.site.login), name="admin-login"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("", include("attempts.web.urls")),
]
